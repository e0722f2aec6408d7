# Knowledge distillation: the frozen teacher is tucked into a one-element list on purpose,
# so it stays out of the student's parameters(), state_dict() and optimizer; it runs
# under no_grad in eval mode.
import torch
import torch.nn.functional as F
from torch import nn


class Student(nn.Module):
    def __init__(self, teacher, temperature=2.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 4))
        self._teacher = [teacher]  # hidden from parameters() / state_dict()
        self.temperature = temperature

    def distill_loss(self, x, y):
        logits = self.net(x)
        with torch.no_grad():
            soft = F.softmax(self._teacher[0](x) / self.temperature, dim=1)
        kd = F.kl_div(F.log_softmax(logits / self.temperature, dim=1), soft, reduction="batchmean")
        return F.cross_entropy(logits, y) + kd * self.temperature**2


torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
teacher.requires_grad_(False)
teacher.eval()
student = Student(teacher)
optimizer = torch.optim.Adam(student.parameters(), lr=3e-3)
for step in range(60):
    x = torch.randn(32, 16)
    with torch.no_grad():
        y = teacher(x).argmax(1)
    loss = student.distill_loss(x, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 20 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
