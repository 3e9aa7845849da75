"""Checkpoints: :mod:`~fbrapids.trainers.checkpoint.directory` (crash-safe, self-verifying
checkpoint directories: temporary name, manifest, rename, the ``latest`` pointer) and
:mod:`~fbrapids.trainers.checkpoint.model_state` (a model's weights, optimizer and tables
in one, as ``fit`` writes and resumes them)."""
