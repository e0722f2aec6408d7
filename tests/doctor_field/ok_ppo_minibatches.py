# Field corpus: a PPO update in the shape of CleanRL's ppo.py (a rollout buffer of fixed-size
# tensors filled under no_grad, GAE advantages, several update epochs over shuffled
# minibatches with the clipped surrogate, value loss and entropy bonus, clipping, and an
# annealed learning rate set on param_groups). A tiny bandit-like environment stands in for
# gym; run under --max-steps it is cut in the middle of an update.
# source: https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo.py
# doctor-args: --max-steps 20
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

torch.manual_seed(1)
np.random.seed(1)
num_envs, num_steps, obs_dim, n_actions = 4, 32, 4, 2
batch_size = num_envs * num_steps
minibatch_size, update_epochs, num_updates = 32, 2, 4
gamma, gae_lambda, clip_coef, ent_coef, vf_coef, lr = 0.99, 0.95, 0.2, 0.01, 0.5, 2.5e-3


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, 32)), nn.Tanh(),
                                    layer_init(nn.Linear(32, 1), std=1.0))
        self.actor = nn.Sequential(layer_init(nn.Linear(obs_dim, 32)), nn.Tanh(),
                                   layer_init(nn.Linear(32, n_actions), std=0.01))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        probs = Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def env_step(obs, action):
    reward = (action.float() == (obs[:, 0] > 0).float()).float()
    return torch.randn(num_envs, obs_dim), reward


agent = Agent()
optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
obs = torch.zeros((num_steps, num_envs, obs_dim))
actions = torch.zeros((num_steps, num_envs))
logprobs = torch.zeros((num_steps, num_envs))
rewards = torch.zeros((num_steps, num_envs))
values = torch.zeros((num_steps, num_envs))
next_obs = torch.randn(num_envs, obs_dim)
for update in range(1, num_updates + 1):
    frac = 1.0 - (update - 1.0) / num_updates
    optimizer.param_groups[0]["lr"] = frac * lr
    for step in range(num_steps):
        obs[step] = next_obs
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step] = value.flatten()
        actions[step] = action
        logprobs[step] = logprob
        next_obs, rewards[step] = env_step(next_obs, action)
    with torch.no_grad():
        next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages = torch.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(num_steps)):
            nextvalues = next_value if t == num_steps - 1 else values[t + 1]
            delta = rewards[t] + gamma * nextvalues - values[t]
            advantages[t] = lastgaelam = delta + gamma * gae_lambda * lastgaelam
        returns = advantages + values
    b_obs, b_logprobs = obs.reshape(-1, obs_dim), logprobs.reshape(-1)
    b_actions, b_advantages = actions.reshape(-1), advantages.reshape(-1)
    b_returns = returns.reshape(-1)
    b_inds = np.arange(batch_size)
    for epoch in range(update_epochs):
        np.random.shuffle(b_inds)
        for start in range(0, batch_size, minibatch_size):
            mb_inds = b_inds[start : start + minibatch_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                b_obs[mb_inds], b_actions.long()[mb_inds])
            ratio = (newlogprob - b_logprobs[mb_inds]).exp()
            mb_adv = b_advantages[mb_inds]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(-mb_adv * ratio,
                                -mb_adv * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean()
            v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb_inds]) ** 2).mean()
            loss = pg_loss - ent_coef * entropy.mean() + v_loss * vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
    print(f"update {update}: mean reward {rewards.mean().item():.3f}")
