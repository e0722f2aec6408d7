# The PyTorch neural-style tutorial, in miniature: LBFGS optimizes the input image
# itself against a frozen feature extractor; the closure lost optimizer.zero_grad().
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


def gram_matrix(x):
    b, c, h, w = x.size()
    features = x.view(b * c, h * w)
    return torch.mm(features, features.t()).div(b * c * h * w)


torch.manual_seed(0)
cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
cnn.eval().requires_grad_(False)
content_img = torch.rand(1, 3, 16, 16)
style_img = torch.rand(1, 3, 16, 16)
content_target = cnn(content_img).detach()
style_target = gram_matrix(cnn(style_img)).detach()

input_img = content_img.clone().requires_grad_(True)
optimizer = optim.LBFGS([input_img])
style_weight, content_weight = 1e4, 1
run = [0]
while run[0] <= 40:

    def closure():
        with torch.no_grad():
            input_img.clamp_(0, 1)
        features = cnn(input_img)
        style_score = style_weight * F.mse_loss(gram_matrix(features), style_target)
        content_score = content_weight * F.mse_loss(features, content_target)
        loss = style_score + content_score
        loss.backward()  # expect-related: missing-zero-grad
        run[0] += 1
        return style_score + content_score

    optimizer.step(closure)  # expect: missing-zero-grad

with torch.no_grad():
    input_img.clamp_(0, 1)
