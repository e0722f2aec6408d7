import torch
from torch import nn

torch.manual_seed(0)
policy = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
log_probs, rewards, returns_seen = [], [], []
for episode in range(30):
    policy.train()
    state = torch.randn(4)
    for t in range(8):
        dist = torch.distributions.Categorical(logits=policy(state))
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        rewards.append(1.0 if action.item() == int(state[0] > 0) else 0.0)
        state = torch.randn(4)
    ret = torch.tensor(rewards)
    loss = -(torch.stack(log_probs) * (ret - ret.mean())).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    log_probs.clear()
    rewards.clear()
    policy.eval()
    with torch.no_grad():
        greedy = sum(int(policy(s).argmax() == int(s[0] > 0)) for s in torch.randn(16, 4))
    returns_seen.append(greedy)
print(returns_seen[-5:])
