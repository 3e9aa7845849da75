"""Files written safely: atomic writes, checksummed manifests, and the bytes read and written
(I/O counters)."""
