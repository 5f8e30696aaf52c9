"""The prediction core: numbers in, numbers out; no Celery, HTTP or SQL here.

- features: a point's features from its measured layers and ops; step_model: the per-machine-type whole-step model
  (a non-negative base and LightGBM on the ratio) and validation: its held-out evaluation;
- reference: the reference predictor for GPUs nobody measured (learnt from public data and our H100 steps);
- memory_model: peak memory and what fits; points: a point's times, cost and energy from its step;
- parallel and layouts: data-parallel steps (NCCL's all-reduce cost, DDP's overlap) over GPU and node layouts;
- input_pipeline: the input pipeline's step (decode on the machine's CPUs, network reads, data echoing).

The worker (Celery), the CLI, calibration and the benches call it; it imports only shared's typed shapes.
"""
