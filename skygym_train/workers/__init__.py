"""Training workers: the batch layout, sequence packing, FSDP2 workers and worker groups."""
