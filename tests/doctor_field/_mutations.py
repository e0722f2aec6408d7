"""Planted bugs over the field corpus's correct scripts: one realistic change each.

Each entry takes a correct ``ok_*.py`` script and replaces text that occurs exactly once
in it (several edits may be listed); the replacement carries the expectation comments the
corpus uses: ``# expect: CODE`` on the line where the finding must point, ``# expect-alt:
CODE`` on another line the finding may point at instead (where either is defensible), and
``# expect-related: CODE`` on a line the finding must list as related. ``crash`` marks a
planted bug that makes the script raise (the doctor then exits 1 with its explanation).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    name: str
    base: str
    edits: tuple[tuple[str, str], ...]
    crash: bool = False


def m(name: str, base: str, *edits: tuple[str, str], crash: bool = False) -> Mutation:
    return Mutation(name, base, tuple(edits), crash)


MUTATIONS = [
    # --- the PyTorch mnist example
    m("mnist_no_zero_grad", "ok_mnist_example",
      ("        optimizer.zero_grad()\n        output = model(data)\n", "        output = model(data)\n"),
      ("        loss.backward()\n        optimizer.step()\n        if batch_idx",
       "        loss.backward()\n        optimizer.step()  # expect: missing-zero-grad\n        if batch_idx")),
    m("mnist_test_without_no_grad", "ok_mnist_example",
      ("    with torch.no_grad():\n        for data, target in test_loader:\n"
       "            data, target = data.to(device), target.to(device)\n            output = model(data)\n",
       "    if True:\n        for data, target in test_loader:\n"
       "            data, target = data.to(device), target.to(device)\n"
       "            output = model(data)  # expect: eval-builds-graph\n")),
    m("mnist_test_without_eval", "ok_mnist_example",
      ("    model.eval()\n    test_loss = 0\n", "    test_loss = 0\n"),
      ("            data, target = data.to(device), target.to(device)\n            output = model(data)\n"
       "            test_loss +=",
       "            data, target = data.to(device), target.to(device)\n"
       "            output = model(data)  # expect: train-mode-in-eval\n            test_loss +=")),
    m("mnist_scheduler_never_stepped", "ok_mnist_example",
      ("        scheduler.step()\n", ""),
      ("    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)\n",
       "    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)  # expect: scheduler-not-stepped\n")),
    m("mnist_head_nine_classes", "ok_mnist_example",
      ("        self.fc2 = nn.Linear(32, 10)\n", "        self.fc2 = nn.Linear(32, 9)  # expect: label-out-of-range\n"),
      ("        loss = F.nll_loss(output, target)\n",
       "        loss = F.nll_loss(output, target)  # expect-related: label-out-of-range\n"),
      crash=True),
    # --- the quickstart tutorial
    m("quickstart_test_without_no_grad", "ok_quickstart_tutorial",
      ("    with torch.no_grad():\n        for X, y in dataloader:\n            pred = model(X)\n",
       "    if True:\n        for X, y in dataloader:\n            pred = model(X)  # expect: eval-builds-graph\n")),
    m("quickstart_loss_kept_with_graph", "ok_quickstart_tutorial",
      ("        optimizer.zero_grad()\n        if batch % 10 == 0:\n",
       "        optimizer.zero_grad()\n        losses.append(loss)  # expect: graph-retained\n        if batch % 10 == 0:\n"),
      ("def train_loop(dataloader, model, loss_fn, optimizer):\n",
       "losses = []\n\n\ndef train_loop(dataloader, model, loss_fn, optimizer):\n")),
    m("quickstart_modules_in_list", "ok_quickstart_tutorial",
      ("        self.linear_relu_stack = nn.Sequential(\n            nn.Linear(12 * 12, 64),\n"
       "            nn.ReLU(),\n            nn.Linear(64, 64),\n            nn.ReLU(),\n            nn.Linear(64, 10),\n        )\n",
       "        self.layers = [nn.Linear(12 * 12, 64), nn.Linear(64, 64)]  # expect: unregistered-module\n"
       "        self.head = nn.Linear(64, 10)\n"),
      ("        logits = self.linear_relu_stack(x)\n",
       "        for layer in self.layers:\n            x = torch.relu(layer(x))\n        logits = self.head(x)\n")),
    # --- REINFORCE and actor-critic
    m("reinforce_no_zero_grad", "ok_reinforce_policy",
      ("    optimizer.zero_grad()\n    policy_loss = torch.cat(policy_loss).sum()\n",
       "    policy_loss = torch.cat(policy_loss).sum()\n"),
      ("    policy_loss.backward()\n    optimizer.step()\n",
       "    policy_loss.backward()\n    optimizer.step()  # expect: missing-zero-grad\n")),
    m("actor_critic_no_zero_grad", "ok_actor_critic",
      ("    optimizer.zero_grad()\n    loss = torch.stack", "    loss = torch.stack"),
      ("    loss.backward()\n    optimizer.step()\n", "    loss.backward()\n    optimizer.step()  # expect: missing-zero-grad\n")),
    # --- the VAE example
    m("vae_sqrt_of_log_variance", "ok_vae_example",
      ("        std = torch.exp(0.5 * logvar)\n", "        std = torch.sqrt(logvar)  # expect: nonfinite-loss\n"),
      crash=True),
    m("vae_train_loss_keeps_graph", "ok_vae_example",
      ("        train_loss += loss.item()\n", "        train_loss += loss  # expect: graph-retained\n")),
    m("vae_test_without_no_grad", "ok_vae_example",
      ("    with torch.no_grad():\n        for i, (data, _) in enumerate(test_loader):\n"
       "            data = data.to(device)\n            recon_batch, mu, logvar = model(data)\n",
       "    if True:\n        for i, (data, _) in enumerate(test_loader):\n"
       "            data = data.to(device)\n            recon_batch, mu, logvar = model(data)  # expect: eval-builds-graph\n")),
    # --- DCGAN
    m("dcgan_discriminator_never_zeroed", "ok_dcgan_example",
      ("        netD.zero_grad()\n        real_cpu = real_cpu.to(device)\n", "        real_cpu = real_cpu.to(device)\n"),
      ("        errD = errD_real + errD_fake\n        optimizerD.step()\n",
       "        errD = errD_real + errD_fake\n        optimizerD.step()  # expect: missing-zero-grad\n")),
    # --- the word language model
    m("word_lm_hidden_not_repackaged", "ok_word_language_model",
      ("        hidden = repackage_hidden(hidden)\n        model.zero_grad()\n"
       "        output, hidden = model(data, hidden)\n",
       "        model.zero_grad()\n        output, hidden = model(data, hidden)  # expect: graph-retained\n"),
      crash=True),
    m("word_lm_evaluate_without_no_grad", "ok_word_language_model",
      ("    with torch.no_grad():\n        for i in range(0, data_source.size(0) - 1, bptt):\n"
       "            data, targets = get_batch(data_source, i)\n            output, hidden = model(data, hidden)\n",
       "    if True:\n        for i in range(0, data_source.size(0) - 1, bptt):\n"
       "            data, targets = get_batch(data_source, i)\n"
       "            output, hidden = model(data, hidden)  # expect: eval-builds-graph\n")),
    m("word_lm_evaluate_without_eval", "ok_word_language_model",
      ("    model.eval()\n    total_loss = 0.0\n    hidden = model.init_hidden(5)\n",
       "    total_loss = 0.0\n    hidden = model.init_hidden(5)\n"),
      ("            data, targets = get_batch(data_source, i)\n            output, hidden = model(data, hidden)\n"
       "            hidden = repackage_hidden(hidden)\n            total_loss += len(data)",
       "            data, targets = get_batch(data_source, i)\n"
       "            output, hidden = model(data, hidden)  # expect: train-mode-in-eval\n"
       "            hidden = repackage_hidden(hidden)\n            total_loss += len(data)")),
    # --- the bigram lecture and the small GPT
    m("bigram_softmax_into_cross_entropy", "ok_bigram_lecture",
      ("            loss = F.cross_entropy(logits, targets)\n",
       "            loss = F.cross_entropy(F.softmax(logits, dim=-1), targets)  # expect: softmax-before-loss\n")),
    m("bigram_torch_softmax_into_cross_entropy", "ok_bigram_lecture",
      ("            loss = F.cross_entropy(logits, targets)\n",
       "            probs = torch.softmax(logits, -1)\n"
       "            loss = F.cross_entropy(probs, targets)  # expect: softmax-before-loss\n")),
    m("bigram_estimate_without_no_grad", "ok_bigram_lecture",
      ("@torch.no_grad()\ndef estimate_loss():\n", "def estimate_loss():\n"),
      ("            logits, loss = model(X, Y)\n            losses[k] = loss.item()\n",
       "            logits, loss = model(X, Y)  # expect: eval-builds-graph\n            losses[k] = loss.item()\n")),
    m("gpt_left_in_eval_mode", "ok_small_gpt",
      ("        out[split] = losses.mean()\n    model.train()\n", "        out[split] = losses.mean()\n"),
      ("    out = {}\n    model.eval()\n", "    out = {}\n    model.eval()  # expect: eval-mode-in-train\n")),
    m("gpt_loss_history_keeps_graph", "ok_small_gpt",
      ("    scaler.update()\n", "    scaler.update()\n    loss_history.append(loss)  # expect: graph-retained\n"),
      ("X, Y = get_batch(\"train\")\nfor iter_num", "loss_history = []\nX, Y = get_batch(\"train\")\nfor iter_num")),
    # --- DDP trainers
    m("ddp_train_sampler_epoch_not_set", "ok_ddp_trainer_eval_sampler",
      ("        self.train_data.sampler.set_epoch(epoch)\n", ""),
      ("        for source, targets in self.train_data:\n",
       "        for source, targets in self.train_data:  # expect: sampler-epoch-not-set\n")),
    m("ddp_spawn_no_zero_grad", "ok_ddp_spawn_tutorial",
      ("        self.optimizer.zero_grad()\n        output = self.model(source)\n",
       "        output = self.model(source)\n"),
      ("        loss.backward()\n        self.optimizer.step()\n",
       "        loss.backward()\n        self.optimizer.step()  # expect: missing-zero-grad\n")),
    m("hogwild_no_zero_grad", "ok_hogwild_mnist",
      ("        optimizer.zero_grad()\n        output = model(data)\n", "        output = model(data)\n"),
      ("        loss.backward()\n        optimizer.step()\n",
       "        loss.backward()\n        optimizer.step()  # expect: missing-zero-grad\n")),
    # --- seq2seq, char-RNN, transfer learning, GAN
    m("seq2seq_decoder_optimizer_not_zeroed", "ok_seq2seq_tutorial",
      ("        encoder_optimizer.zero_grad()\n        decoder_optimizer.zero_grad()\n",
       "        encoder_optimizer.zero_grad()  # expect-alt: missing-zero-grad\n"),
      ("        decoder_optimizer.step()\n", "        decoder_optimizer.step()  # expect: missing-zero-grad\n")),
    m("char_rnn_no_zero_grad", "ok_char_rnn_names",
      ("    rnn.zero_grad()\n", ""),
      ("        p.data.add_(p.grad.data, alpha=-learning_rate)\n",
       "        p.data.add_(p.grad.data, alpha=-learning_rate)  # expect: missing-zero-grad\n")),
    m("transfer_optimizer_before_new_head", "ok_transfer_learning",
      ("num_ftrs = model_conv.fc.in_features\nmodel_conv.fc = nn.Linear(num_ftrs, 2)\ncriterion = nn.CrossEntropyLoss()\n"
       "optimizer_conv = optim.SGD(model_conv.fc.parameters(), lr=0.01, momentum=0.9)\n",
       "optimizer_conv = optim.SGD(model_conv.parameters(), lr=0.01, momentum=0.9)  # expect: param-not-in-optimizer\n"
       "num_ftrs = model_conv.fc.in_features\nmodel_conv.fc = nn.Linear(num_ftrs, 2)\ncriterion = nn.CrossEntropyLoss()\n")),
    m("gan_reset_grad_only_discriminator", "ok_gan_reset_grad",
      ("    d_optimizer.zero_grad()\n    g_optimizer.zero_grad()\n",
       "    d_optimizer.zero_grad()  # expect-alt: missing-zero-grad\n"),
      ("        g_optimizer.step()\n", "        g_optimizer.step()  # expect: missing-zero-grad\n")),
    # --- tabular regression
    m("regression_target_not_reshaped", "ok_tabular_regression",
      ("y_train = torch.tensor(y_train).reshape(-1, 1)\n", "y_train = torch.tensor(y_train)\n"),
      ("        loss = loss_fn(y_pred, y_batch)\n", "        loss = loss_fn(y_pred, y_batch)  # expect: loss-broadcast\n")),
    m("regression_lr_far_too_high", "ok_tabular_regression",
      ("optimizer = optim.Adam(model.parameters(), lr=0.005)\n",
       "optimizer = optim.SGD(model.parameters(), lr=1.0)  # expect-related: nonfinite-loss\n"),
      ("        loss = loss_fn(y_pred, y_batch)\n", "        loss = loss_fn(y_pred, y_batch)  # expect: nonfinite-loss\n"),
      ("        loss.backward()\n        optimizer.step()\n    model.eval()\n",
       "        loss.backward()  # expect-alt: nonfinite-loss\n        optimizer.step()\n    model.eval()\n"),
      crash=True),  # the NaN validation loss never improves: best_weights stays None
    # --- DQN
    m("dqn_no_zero_grad", "ok_dqn_tutorial",
      ("    optimizer.zero_grad()\n    loss.backward()\n", "    loss.backward()\n"),
      ("    torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)\n    optimizer.step()\n",
       "    torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)\n"
       "    optimizer.step()  # expect: missing-zero-grad\n")),
    # --- tiny MNIST loops
    m("tiny_mnist_eval_without_no_grad", "ok_tiny_mnist_loader",
      ("    with torch.no_grad():\n        for images, labels in test_loader:\n"
       "            correct += (model(images).argmax(1) == labels).sum().item()\n",
       "    for images, labels in test_loader:\n"
       "        correct += (model(images).argmax(1) == labels).sum().item()  # expect: eval-builds-graph\n")),
    m("tiny_mnist_standardize_by_zero_std", "ok_tiny_mnist_loader",
      ("            self.data[i, 2 * t : 2 * t + 4, 4:24] = 255\n",
       "            self.data[i, 2 * t : 2 * t + 4, 4:24] = 255\n        self.data[:, :, :2] = 0\n"
       "        pixels = self.data.float().div(255)\n        self.mean, self.std = pixels.mean(0), pixels.std(0)\n"),
      ("        img = (img - 0.1307) / 0.3081\n",
       "        img = (img - self.mean) / self.std  # expect: nonfinite-input\n")),
    # --- distillation, AMP + accumulation, PPO, EMA autoencoder
    m("kd_student_never_zeroed", "ok_distillation_kd",
      ("        for inputs, labels in train_loader:\n            optimizer.zero_grad()\n            with torch.no_grad():\n",
       "        for inputs, labels in train_loader:\n            with torch.no_grad():\n"),
      ("            loss = soft_target_loss_weight * soft_targets_loss + ce_loss_weight * label_loss\n"
       "            loss.backward()\n            optimizer.step()\n",
       "            loss = soft_target_loss_weight * soft_targets_loss + ce_loss_weight * label_loss\n"
       "            loss.backward()\n            optimizer.step()  # expect: missing-zero-grad\n")),
    m("kd_test_without_eval", "ok_distillation_kd",
      ("    model.eval()\n    correct, total = 0, 0\n", "    correct, total = 0, 0\n"),
      ("            _, predicted = torch.max(model(inputs), 1)\n",
       "            _, predicted = torch.max(model(inputs), 1)  # expect: train-mode-in-eval\n")),
    m("amp_scheduler_never_stepped", "ok_amp_bf16_accum",
      ("            lr_scheduler.step()\n", ""),
      ("lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)\n",
       "lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)  # expect: scheduler-not-stepped\n")),
    m("ppo_no_zero_grad", "ok_ppo_minibatches",
      ("            optimizer.zero_grad()\n            loss.backward()\n", "            loss.backward()\n"),
      ("            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)\n            optimizer.step()\n",
       "            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)\n"
       "            optimizer.step()  # expect: missing-zero-grad\n")),
    m("ema_eval_without_no_grad", "ok_autoencoder_ema",
      ("    with torch.no_grad():\n        val_loss = criterion(ema_model(val_images), val_images).item()\n",
       "    val_loss = criterion(ema_model(val_images), val_images).item()  # expect: eval-builds-graph\n")),
    m("lora_optimizer_misses_second_adapter", "ok_lora_finetune",
      ("optimizer = torch.optim.AdamW(trainable, lr=5e-3)\n",
       "optimizer = torch.optim.AdamW(model.ff1.parameters(), lr=5e-3)  # expect: param-not-in-optimizer\n")),
]
