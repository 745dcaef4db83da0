"""The diagnosis of the RLPD + demonstrations runs on PandaLift that never succeed: on the
demonstrations' states, the critics' Q of the demonstrated action vs of the policy's greedy
action, and the policy's distance from the demonstrated action, per action dimension.

    MINARI_DATASETS_PATH=<root> python benchmarks/results/rlpd_pandalift_demos/diagnose.py \\
        <run dir> local/pandalift/state-demos-v0
"""

import sys

import torch

from rlcore.offline.datasets import load_dataset
from rlcore.policies import load_agent

run, dataset_id = sys.argv[1], sys.argv[2]
agent = load_agent(run)
data = load_dataset(dataset_id)
torch.manual_seed(0)
rows = torch.randint(0, len(data), (2048,))
obs, demo = data.observations(rows), data.action[rows]
with torch.no_grad():
    greedy = torch.as_tensor(agent.act(obs.numpy(), deterministic=True))
    q_demo = agent.critic(obs, demo).mean(0)  # RLPD on the state: no encoder, no normaliser
    q_greedy = agent.critic(obs, greedy).mean(0)
print(
    f"Q(s, a_demo) {q_demo.mean():.2f}, Q(s, pi(s)) {q_greedy.mean():.2f}, "
    f"share Q(a_demo) > Q(pi) {(q_demo > q_greedy).float().mean():.2f}, "
    f"|pi(s) - a_demo| {(greedy - demo).abs().mean():.3f}"
)
print("per dim |pi - a_demo|", (greedy - demo).abs().mean(0).numpy().round(3))
print(
    "mean demo action",
    demo.mean(0).numpy().round(3),
    "mean greedy action",
    greedy.mean(0).numpy().round(3),
)
