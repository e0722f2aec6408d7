"""The registry: the probes that run, in order. Adding a probe is one file in
``probes/`` (named after the finding code it reports) and one line here."""

from __future__ import annotations

from typing import Any

from trainwell.doctor.probes.allocator_fragmentation import AllocatorFragmentationProbe
from trainwell.doctor.probes.amp_overflow import AmpOverflowProbe
from trainwell.doctor.probes.anomaly_mode_on import AnomalyModeOnProbe
from trainwell.doctor.probes.clip_before_backward import ClipBeforeBackwardProbe
from trainwell.doctor.probes.cuda_in_getitem import CudaInGetitemProbe
from trainwell.doctor.probes.data_bottleneck import DataBottleneckProbe
from trainwell.doctor.probes.data_parallel import DataParallelProbe
from trainwell.doctor.probes.eval_builds_graph import EvalBuildsGraphProbe
from trainwell.doctor.probes.eval_mode_in_train import EvalModeInTrainProbe
from trainwell.doctor.probes.graph_retained import GraphRetainedProbe
from trainwell.doctor.probes.graph_retained_eval import GraphRetainedEvalProbe
from trainwell.doctor.probes.label_out_of_range import LabelOutOfRangeProbe
from trainwell.doctor.probes.loss_at_init import LossAtInitProbe
from trainwell.doctor.probes.loss_broadcast import LossBroadcastProbe
from trainwell.doctor.probes.loss_no_gradient import LossNoGradientProbe
from trainwell.doctor.probes.loss_not_decreasing import LossNotDecreasingProbe
from trainwell.doctor.probes.missing_zero_grad import MissingZeroGradProbe
from trainwell.doctor.probes.missing_zero_grad_manual import MissingZeroGradManualProbe
from trainwell.doctor.probes.nonfinite_grad import NonFiniteGradProbe
from trainwell.doctor.probes.nonfinite_input import NonFiniteInputProbe
from trainwell.doctor.probes.nonfinite_loss import NonFiniteLossProbe
from trainwell.doctor.probes.param_not_in_optimizer import ParamNotInOptimizerProbe
from trainwell.doctor.probes.param_without_grad import ParamWithoutGradProbe
from trainwell.doctor.probes.retain_graph import RetainGraphProbe
from trainwell.doctor.probes.sampler_epoch_not_set import SamplerEpochNotSetProbe
from trainwell.doctor.probes.save_whole_model import SaveWholeModelProbe
from trainwell.doctor.probes.scheduler_not_stepped import SchedulerNotSteppedProbe
from trainwell.doctor.probes.softmax_before_loss import SoftmaxBeforeLossProbe
from trainwell.doctor.probes.sorted_labels_no_shuffle import SortedLabelsNoShuffleProbe
from trainwell.doctor.probes.step_before_backward import StepBeforeBackwardProbe
from trainwell.doctor.probes.tensor_accumulation import TensorAccumulationProbe
from trainwell.doctor.probes.train_mode_in_eval import TrainModeInEvalProbe
from trainwell.doctor.probes.unregistered_module import UnregisteredModuleProbe


def default_probes() -> list[Any]:
    """Every probe, fresh, in the order they hear each event: memory first, then
    numerics, wiring, modes, losses, data, practices and learning."""
    return [
        RetainGraphProbe(),
        EvalBuildsGraphProbe(),
        GraphRetainedProbe(),
        GraphRetainedEvalProbe(),
        TensorAccumulationProbe(),
        AllocatorFragmentationProbe(),
        NonFiniteLossProbe(),
        NonFiniteInputProbe(),
        NonFiniteGradProbe(),
        AmpOverflowProbe(),
        MissingZeroGradProbe(),
        StepBeforeBackwardProbe(),
        LossNoGradientProbe(),
        MissingZeroGradManualProbe(),
        ParamNotInOptimizerProbe(),
        UnregisteredModuleProbe(),
        ParamWithoutGradProbe(),
        SchedulerNotSteppedProbe(),
        TrainModeInEvalProbe(),
        EvalModeInTrainProbe(),
        SamplerEpochNotSetProbe(),
        SoftmaxBeforeLossProbe(),
        LabelOutOfRangeProbe(),
        LossAtInitProbe(),
        LossBroadcastProbe(),
        DataBottleneckProbe(),
        SortedLabelsNoShuffleProbe(),
        CudaInGetitemProbe(),
        ClipBeforeBackwardProbe(),
        AnomalyModeOnProbe(),
        DataParallelProbe(),
        SaveWholeModelProbe(),
        LossNotDecreasingProbe(),
    ]
