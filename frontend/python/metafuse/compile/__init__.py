"""The compile front: how a user's Python function becomes a compiled
program (capture, then the C++ compiler). ``metafuse.compile`` itself is
the function exported by the top-level package."""
