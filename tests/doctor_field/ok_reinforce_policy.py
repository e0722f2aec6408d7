# Field corpus: the shape of pytorch/examples reinforcement_learning/reinforce.py (a Policy
# module holding saved_log_probs and rewards, select_action with Categorical, finish_episode
# with normalized returns, the lists emptied with del after each update). A tiny corridor
# environment stands in for gym's CartPole. Run under --max-steps it is cut mid-episode.
# source: https://github.com/pytorch/examples/blob/main/reinforcement_learning/reinforce.py
# doctor-args: --max-steps 9
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

gamma = 0.99
eps = np.finfo(np.float32).eps.item()


class Corridor:
    """Walk right to the goal in at most 30 moves; reward 1 at the goal."""

    def reset(self):
        self.pos, self.t = 0, 0
        return self._obs()

    def _obs(self):
        return np.array([self.pos / 10.0, self.t / 30.0, 1.0], dtype=np.float32)

    def step(self, action):
        self.pos += 1 if action == 1 else -1
        self.pos = max(self.pos, 0)
        self.t += 1
        done = self.pos >= 10 or self.t >= 30
        return self._obs(), (1.0 if self.pos >= 10 else -0.01), done


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(3, 32)
        self.dropout = nn.Dropout(p=0.2)
        self.affine2 = nn.Linear(32, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


torch.manual_seed(543)
env = Corridor()
policy = Policy()
optimizer = optim.Adam(policy.parameters(), lr=1e-2)


def select_action(state):
    state = torch.from_numpy(state).float().unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode():
    R = 0
    policy_loss = []
    returns = []
    for r in policy.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]


def main():
    running_reward = 0
    for i_episode in range(1, 40):
        state, ep_reward = env.reset(), 0
        for t in range(1, 100):
            action = select_action(state)
            state, reward, done = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        finish_episode()
        if i_episode % 10 == 0:
            print(f"Episode {i_episode}\tLast reward: {ep_reward:.2f}\tAverage: {running_reward:.2f}")


if __name__ == "__main__":
    main()
