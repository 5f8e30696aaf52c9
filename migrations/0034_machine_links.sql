-- A machine type registered by its figures can say how its GPUs are linked and how it reaches other machines, so a
-- DGX, an ABCI node or a lab's own cluster can be asked data-parallel questions. NULL: not given (a catalog type's
-- links come from data/interconnect.csv; an own type without them is assumed PCIe 4.0 and alone).
ALTER TABLE machine_types
    ADD COLUMN gpu_link text CHECK (gpu_link IN ('nvswitch', 'nvlink', 'pcie', 'none')),
    ADD COLUMN gpu_link_gbs double precision CHECK (gpu_link_gbs > 0),   -- GB/s per GPU each way (bus bandwidth)
    ADD COLUMN nics integer CHECK (nics > 0),                            -- network interfaces to other machines
    ADD COLUMN nic_gbps double precision CHECK (nic_gbps > 0),           -- Gbit/s of each
    ADD COLUMN network_rdma boolean;                                     -- RDMA (InfiniBand, RoCE, EFA) or TCP
