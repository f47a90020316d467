# From the good checkpoint GOOD, makes BAD/truncated (model.safetensors cut short) and
# BAD/garbled (config.json not JSON).
file(REMOVE_RECURSE ${BAD})
file(COPY ${GOOD}/ DESTINATION ${BAD}/truncated)
file(WRITE ${BAD}/truncated/model.safetensors "short")
file(COPY ${GOOD}/ DESTINATION ${BAD}/garbled)
file(WRITE ${BAD}/garbled/config.json "{\"format\": \"strata-lstm-lm\", \"layers\": ")
