-- Each whole step's measured peak memory, stored by the agent with its timing (gpu_agent/step_bench.py:
-- the allocator's peak of the step's first, untimed run, torch.cuda.max_memory_allocated on a GPU, torch.profiler's
-- allocation records on a CPU). Like the timing, it belongs to the row's environment. NULL: measured before this
-- migration, or out of memory.
ALTER TABLE step_measurements ADD COLUMN peak_memory_bytes bigint CHECK (peak_memory_bytes > 0);

-- The agent writes it (gpu_agent/store.py INSERT_STEP); it never reads it back.
GRANT INSERT (peak_memory_bytes) ON step_measurements TO traincast_agent;
