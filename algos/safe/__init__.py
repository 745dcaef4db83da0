"""Constrained (safe) RL: PPO-Lagrangian, SAC-Lagrangian, CPO, FISOR."""
