"""Checkpoints: when and what the Checkpointer saves, the atomic file format, sharded (FSDP)
checkpoints, and resume."""
