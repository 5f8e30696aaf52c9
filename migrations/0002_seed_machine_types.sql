-- Machine catalog seed. AWS figures: GPU instance types with Linux on-demand prices in
-- us-east-1 from a public machine-readable cloud catalog (2025 snapshot, after the June-2025
-- P4/P5 price cut) and each GPU's published peak figures; A10G figures are approximate.
-- Prices change: refresh them from AWS; figures_read_on stays NULL until then.

INSERT INTO machine_types (name, provider, gpu, gpu_count, gpu_memory_gib, vcpus, memory_gib,
    price_usd_per_hour, gpu_fp32_tflops, gpu_fp16_tflops, gpu_mem_bandwidth_gbs, gpu_tdp_watts, source)
VALUES
    ('local', 'local', NULL, 0, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL,
     'the machine the local agent runs on (its device is recorded with every measurement)'),
    ('g4dn.xlarge', 'aws', 'T4', 1, 16, 4, 16, 0.526, 8.1, 65, 320, 70,
     'aws_gpu_instances.csv (2025 snapshot, us-east-1 on-demand)'),
    ('g5.xlarge', 'aws', 'A10G', 1, 24, 4, 16, 1.006, 31.2, 70, 600, 300,
     'aws_gpu_instances.csv (2025 snapshot, us-east-1 on-demand)'),
    ('g6.xlarge', 'aws', 'L4', 1, 24, 4, 16, 0.8048, 30.3, 121, 300, 72,
     'aws_gpu_instances.csv (2025 snapshot, us-east-1 on-demand)'),
    ('g6e.xlarge', 'aws', 'L40S', 1, 48, 4, 32, 1.861, 91.6, 362, 864, 350,
     'aws_gpu_instances.csv (2025 snapshot, us-east-1 on-demand)'),
    ('p3.2xlarge', 'aws', 'V100-SXM2-16GB', 1, 16, 8, 61, 3.06, 15.7, 125, 900, 300,
     'aws_gpu_instances.csv (2025 snapshot, us-east-1 on-demand)'),
    ('p3.8xlarge', 'aws', 'V100-SXM2-16GB', 4, 64, 32, 244, 12.24, 15.7, 125, 900, 300,
     'aws_gpu_instances.csv (2025 snapshot, us-east-1 on-demand)'),
    ('p4d.24xlarge', 'aws', 'A100-SXM4-40GB', 8, 320, 96, 1152, 21.9576, 19.5, 312, 1555, 400,
     'aws_gpu_instances.csv (2025 snapshot, us-east-1 on-demand)'),
    ('p5.48xlarge', 'aws', 'H100-SXM5-80GB', 8, 640, 192, 2048, 55.04, 67, 989, 3350, 700,
     'aws_gpu_instances.csv (2025 snapshot, us-east-1 on-demand)');
