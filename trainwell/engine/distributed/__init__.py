"""Placing the model on devices and processes: DDP, FSDP, torch.compile, torchrun launching and the
workers' guards."""
