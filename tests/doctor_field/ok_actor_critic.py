# Field corpus: the shape of pytorch/examples reinforcement_learning/actor_critic.py (a
# two-headed Policy, SavedAction namedtuples, smooth_l1 value loss, del lists after the
# update). A tiny corridor environment stands in for CartPole.
# source: https://github.com/pytorch/examples/blob/main/reinforcement_learning/actor_critic.py
# doctor-args: --max-steps 12
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

SavedAction = namedtuple("SavedAction", ["log_prob", "value"])
gamma = 0.99
eps = np.finfo(np.float32).eps.item()


class Corridor:
    def reset(self):
        self.pos, self.t = 0, 0
        return np.array([0.0, 0.0, 1.0], dtype=np.float32)

    def step(self, action):
        self.pos = max(self.pos + (1 if action == 1 else -1), 0)
        self.t += 1
        done = self.pos >= 8 or self.t >= 25
        obs = np.array([self.pos / 8.0, self.t / 25.0, 1.0], dtype=np.float32)
        return obs, (1.0 if self.pos >= 8 else 0.0), done


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(3, 64)
        self.action_head = nn.Linear(64, 2)
        self.value_head = nn.Linear(64, 1)
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_prob = F.softmax(self.action_head(x), dim=-1)
        state_values = self.value_head(x)
        return action_prob, state_values


torch.manual_seed(543)
model = Policy()
optimizer = optim.Adam(model.parameters(), lr=3e-2)
env = Corridor()


def select_action(state):
    state = torch.from_numpy(state).float()
    probs, state_value = model(state)
    m = Categorical(probs)
    action = m.sample()
    model.saved_actions.append(SavedAction(m.log_prob(action), state_value))
    return action.item()


def finish_episode():
    R = 0
    saved_actions = model.saved_actions
    policy_losses = []
    value_losses = []
    returns = []
    for r in model.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for (log_prob, value), R in zip(saved_actions, returns):
        advantage = R - value.item()
        policy_losses.append(-log_prob * advantage)
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
    optimizer.zero_grad()
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
    loss.backward()
    optimizer.step()
    del model.rewards[:]
    del model.saved_actions[:]


def main():
    running_reward = 0
    for i_episode in range(1, 40):
        state = env.reset()
        ep_reward = 0
        for t in range(1, 100):
            action = select_action(state)
            state, reward, done = env.step(action)
            model.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        finish_episode()


if __name__ == "__main__":
    main()
