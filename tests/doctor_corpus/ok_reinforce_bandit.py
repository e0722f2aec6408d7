# (review script) written to the doctor's spec; expected: none
# REINFORCE on a contextual bandit (pytorch/examples reinforce.py style): the policy's
# log-probabilities times normalized returns; the "loss" is a surrogate that does not
# go down while the reward goes up.
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical

torch.manual_seed(0)
n_arms, d = 4, 8
true_w = torch.randn(d, n_arms)
policy = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, n_arms))
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
eps = torch.finfo(torch.float32).eps
running_reward = 0.0
for episode in range(300):
    ctx = torch.randn(32, d)
    dist = Categorical(logits=policy(ctx))
    actions = dist.sample()
    rewards = (ctx @ true_w).gather(1, actions[:, None]).squeeze(1) + 0.1 * torch.randn(32)
    returns = (rewards - rewards.mean()) / (rewards.std() + eps)
    policy_loss = -(dist.log_prob(actions) * returns).sum()
    optimizer.zero_grad()
    policy_loss.backward()
    optimizer.step()
    running_reward = 0.05 * rewards.mean().item() + 0.95 * running_reward
    if episode % 50 == 0:
        print(f"episode {episode} running reward {running_reward:.3f}")
