"""``metafuse launch -n N script.py [args]``: a distributed job's processes
on this machine, with the variables torchrun sets; the same as
``python3 -m metafuse.distributed.launch`` (docs/distributed.md)."""

from metafuse.distributed import launch


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "launch", help="run a script in N local processes of one distributed world",
        description=launch.DESCRIPTION + " Each process gets MASTER_ADDR, MASTER_PORT, "
                    "RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and OMP_NUM_THREADS "
                    "(its share of the cores). Exit status: the first failing process's, "
                    "124 when --timeout ran out, 2 on bad usage, else 0.")
    launch.add_arguments(parser)
    parser.set_defaults(run=lambda args: launch.run_parsed(args, parser))
