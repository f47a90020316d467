#!/usr/bin/env python3
"""Derives the invalid seed traces (and the valid unknown-kinds.seed) from valid-small.seed (itself written by
`make_sample_trace valid-small.seed --small` from a real actor_system run).

rank0-of-2.seed and rank1-of-2.seed are the two ranks' traces (format version 2) of a real
`mpirun -np 2 rank_ping_pong 3` with STRATA_TRACE set; rank1-other-job.seed is rank 1's with
another job id, for the bad-input tests of `strata-trace merge`.

Run from this folder: python3 make_corpus.py. The files are checked in; the bad-input tests in
../CMakeLists.txt and tools/trace/fuzz.sh use them."""
import struct

good = open("valid-small.seed", "rb").read()
magic, version, record_size, start, count, dropped, nstrings, ntypes = struct.unpack_from("<8sIIQQQII", good, 0)
assert magic == b"STRATATR" and version == 1 and record_size == 40
# Offset of the first event: skip both length-prefixed tables.
pos = 48
for _ in range(nstrings + ntypes):
    (n,) = struct.unpack_from("<I", good, pos)
    pos += 4 + n
events_at = pos
assert len(good) - events_at == count * 40


def patch(data, offset, fmt, value):
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def first_event(kind):
    for i in range(count):
        if good[events_at + i * 40 + 38] == kind:
            return events_at + i * 40
    raise SystemExit(f"no event of kind {kind}")


files = {
    "empty.seed": b"",
    "truncated-header.seed": good[:30],
    "truncated-events.seed": good[: events_at + 40 * (count // 2) + 17],
    "wrong-magic.seed": b"STRATATX" + good[8:],
    "wrong-version.seed": patch(good, 8, "<I", 7),
    # The first string's length runs past the end of the file.
    "string-past-end.seed": patch(good, 48, "<I", len(good)),
    # A spawn event naming a string the table does not have.
    "bad-string-id.seed": patch(good, first_event(1) + 32, "<I", nstrings + 5),
    # Two events swapped out of time order: the later one first.
    "unsorted.seed": patch(good, events_at, "<Q", struct.unpack_from("<Q", good, events_at + 40 * (count - 1))[0] + 1),
}


def with_unknown_kinds(kinds):
    """The valid trace plus events of kinds a version-1 reader does not know (a newer writer's),
    at the last timestamp, so the events stay sorted."""
    (last_ts,) = struct.unpack_from("<Q", good, events_at + 40 * (count - 1))
    extra = b"".join(struct.pack("<QQQQIHBB", last_ts, 1, 0, 0, 0, 0, k, 0) for k in kinds)
    return patch(good, 24, "<Q", count + len(kinds)) + extra


# Rank 1's trace claiming another job (version 2 header: rank u32 at 48, world size at 52, job id at 56).
rank1 = open("rank1-of-2.seed", "rb").read()
assert struct.unpack_from("<8sIII", rank1, 0)[1] == 2 and struct.unpack_from("<I", rank1, 48)[0] == 1
files["rank1-other-job.seed"] = patch(rank1, 56, "<Q", struct.unpack_from("<Q", rank1, 56)[0] ^ 1)

# Valid: three events of kinds 200 and 201 that readers skip and count (docs/trace-format.md).
files["unknown-kinds.seed"] = with_unknown_kinds([200, 201, 200])
for name, data in files.items():
    open(name, "wb").write(data)
    print(f"{name}: {len(data)} bytes")
