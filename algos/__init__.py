"""Algorithms: one readable file each, built from rlcore's shared parts."""
