"""Jobs of several processes: one training run spread over workers on one or more machines.

- ``group``: a worker's place in a job (``ProcessGroup``, ``Joined``), read
  from its launcher's environment (torchrun, Slurm, multidev's own);
- ``launch``: what ``--processes``, ``--nnodes``, ``--node-rank`` and
  ``--master`` ask for (``Launch``);
- ``workers``: ``train(processes=N)`` starting this machine's workers
  through the engine's launcher and reading rank 0's result;
- ``spawn``: the launcher for frameworks that bring none (JAX, MXNet);
- ``faults``: restarts after a fault (``--max-restarts``) and signals passed on;
- ``job``: inside a running worker, the rows it reads, the sums it shares
  and the check that every rank got the same settings;
- ``threads``: the cores shared out among the workers;
- ``hostsum``: gradients summed through shared memory where every process
  of a job is on one machine;
- ``rowgather``: there too, a sharded job's rows gathered whole.
"""
