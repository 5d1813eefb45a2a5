"""Operator tools: doctor, install, ls, probe, nccl-env."""
