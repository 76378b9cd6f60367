"""Scenario table for run_all.py. Nothing here is copied into a run's work dir."""
import json

T = "python -m torch.distributed.run"


def extra(*rows):
    return json.dumps(list(rows))


# launch styles: A torchrun|tee, B torchrun --log-dir/--redirects/--tee, C two agents as two nodes,
# D torch.multiprocessing.spawn with stdout/stderr split, E python -m torch.distributed.run with stdout/stderr split
SCENARIOS = [
    dict(name="oom-lecture-recording", gpu_only=True, exclusive=True, style="E",
         data=extra({"split": "train", "shard": 1, "kind": "wav", "duration": 2400.0}),
         args="--set data.max_frames=250000 --set data.num_workers=0"),
    dict(name="unk-char-decoder-embedding", gpu_only=True, style="E",
         env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
         data=extra({"split": "train", "shard": 1, "kind": "wav", "duration": 3.0, "text": "the café was naïve about it", "pos": 3},
                    {"split": "train", "shard": 3, "kind": "wav", "duration": 4.0, "text": "déjà vu at the première", "pos": 5})),
    dict(name="cvd-per-rank-wrapper", gpu_only=True, style="B", wrapper=True),
    dict(name="warpctc-missing", style="A", args="--ctc-impl warp"),
    dict(name="n-mels-mismatch", style="B", args="--set data.n_mels=64", env={"TORCH_DISTRIBUTED_DEBUG": "INFO"}),
    dict(name="sampler-choice-typo", style="D", args="--sampler bucketing"),
    dict(name="specaug-freq-mask-too-wide", style="D", args="--set data.freq_mask=100"),
    dict(name="bucket-pack-infinite-loop", style="C", timeout_gpu=150, timeout_cpu=150,
         data=extra({"split": "train", "shard": 3, "kind": "wav", "duration": 45.0}),
         env={"NCCL_DEBUG": "WARN"}),
    dict(name="html-as-wav", style="B",
         data=extra({"split": "train", "shard": 3, "kind": "html", "duration": 3.2})),
    dict(name="wer-empty-reference", style="C",
         data=extra({"split": "dev", "shard": 1, "kind": "wav", "duration": 2.0, "text": "", "pos": 1}),
         env={"NCCL_DEBUG": "WARN"}),
    dict(name="resume-vocab-grown", style="A",
         prep_args="--set train.save_every={steps} --max-steps {steps}",
         args="--set train.save_every={steps} --set data.vocab=letters+digits --resume auto"),
]
