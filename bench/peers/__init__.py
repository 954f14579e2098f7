"""The contenders of ``bench.bench_models`` beside multidev's engines: each framework's hand-written network and
training loop, one module each, every one built from the numbers in :mod:`bench.peers.nets` so that all of them
train the same architecture."""
