"""The registry: the probes that run, in order. Adding a probe is one file in
``probes/`` and one line here."""

from __future__ import annotations

from typing import Any

from trainwell.doctor.probes.allocator_fragmentation import AllocatorProbe
from trainwell.doctor.probes.amp_overflow import AmpOverflowProbe
from trainwell.doctor.probes.data_bottleneck import DataBottleneckProbe
from trainwell.doctor.probes.eval_builds_graph import EvalBuildsGraphProbe
from trainwell.doctor.probes.eval_mode_in_train import EvalModeInTrainProbe
from trainwell.doctor.probes.graph_retained import GraphRetainedProbe
from trainwell.doctor.probes.label_out_of_range import LossInputsProbe
from trainwell.doctor.probes.loss_broadcast import LossBroadcastProbe
from trainwell.doctor.probes.loss_not_decreasing import LossNotDecreasingProbe
from trainwell.doctor.probes.missing_zero_grad import GradWiringProbe
from trainwell.doctor.probes.missing_zero_grad_update import UpdateWatchProbe
from trainwell.doctor.probes.nonfinite_loss import NonFiniteProbe
from trainwell.doctor.probes.param_not_in_optimizer import ParamCoverageProbe
from trainwell.doctor.probes.param_without_grad import ParamWithoutGradProbe
from trainwell.doctor.probes.retain_graph import RetainGraphProbe
from trainwell.doctor.probes.sampler_epoch_not_set import SamplerEpochProbe
from trainwell.doctor.probes.scheduler_not_stepped import SchedulerProbe
from trainwell.doctor.probes.softmax_before_loss import SoftmaxBeforeLossProbe
from trainwell.doctor.probes.step_before_backward import StepBeforeBackwardProbe
from trainwell.doctor.probes.train_mode_in_eval import TrainModeInEvalProbe


def default_probes() -> list[Any]:
    """Every probe, fresh, in the order they hear each event: memory first, then
    numerics, wiring, modes, losses and learning."""
    return [
        RetainGraphProbe(),
        EvalBuildsGraphProbe(),
        GraphRetainedProbe(),
        AllocatorProbe(),
        NonFiniteProbe(),
        AmpOverflowProbe(),
        GradWiringProbe(),
        StepBeforeBackwardProbe(),
        UpdateWatchProbe(),
        ParamCoverageProbe(),
        ParamWithoutGradProbe(),
        SchedulerProbe(),
        TrainModeInEvalProbe(),
        EvalModeInTrainProbe(),
        SamplerEpochProbe(),
        SoftmaxBeforeLossProbe(),
        LossInputsProbe(),
        LossBroadcastProbe(),
        DataBottleneckProbe(),
        LossNotDecreasingProbe(),
    ]
