"""metafuse.vmap's implementation: the batched function and its strategies
(function.py, strategy.py), the arguments of a chunk of tasks
(arguments.py), per-task gradients (task_gradients.py) and chunked runs
(parallel_chunks.py, recomputed_chunks.py). ``metafuse.vmap`` itself is the
function exported by the top-level package."""
