# From the good checkpoint GOOD, makes BAD/truncated (model.safetensors cut short),
# BAD/garbled (config.json not JSON), BAD/negative_layers, BAD/unknown_key and BAD/version_text
# (config.json edited by hand: layers -1, an extra key, the version as a string), and
# BAD/interrupted: a save killed before its config.json landed (new data files, the committed
# ones kept as .prev-<name>), which must still load as the committed checkpoint.
file(REMOVE_RECURSE ${BAD})
file(COPY ${GOOD}/ DESTINATION ${BAD}/truncated)
file(WRITE ${BAD}/truncated/model.safetensors "short")
file(COPY ${GOOD}/ DESTINATION ${BAD}/garbled)
file(WRITE ${BAD}/garbled/config.json "{\"format\": \"strata-lstm-lm\", \"layers\": ")
file(READ ${GOOD}/config.json config)
foreach(edit IN ITEMS negative_layers unknown_key version_text)
  file(COPY ${GOOD}/ DESTINATION ${BAD}/${edit})
endforeach()
string(REGEX REPLACE "\"layers\": [0-9]+" "\"layers\": -1" edited "${config}")
file(WRITE ${BAD}/negative_layers/config.json "${edited}")
string(REGEX REPLACE "^{" "{\"bogus\": 1," edited "${config}")
file(WRITE ${BAD}/unknown_key/config.json "${edited}")
string(REGEX REPLACE "\"version\": 1" "\"version\": \"1\"" edited "${config}")
file(WRITE ${BAD}/version_text/config.json "${edited}")
file(COPY ${GOOD}/ DESTINATION ${BAD}/interrupted)
foreach(name model.safetensors vocab.json optimizer.json)
  file(RENAME ${BAD}/interrupted/${name} ${BAD}/interrupted/.prev-${name})
  file(WRITE ${BAD}/interrupted/${name} "the next save's bytes, not yet committed")
endforeach()
