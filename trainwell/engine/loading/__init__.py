"""The training and evaluation loaders: batches, samplers, the resumable data order, and seeding."""
