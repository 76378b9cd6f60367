"""Writes scenarios/<name>/job.sbatch (+ overrides.json) from templates/. Placeholders @RUN@ and @PROJ@
are filled in by run_all.sh for each fresh run directory."""
import json, os
HERE = os.path.dirname(os.path.abspath(__file__))
T = {n: open(os.path.join(HERE, "templates", n + ".sbatch")).read() for n in ("torchrun", "srun")}
LEVELS = 'srun --ntasks=1 $PY -m ppo.make_levels --out $RUN/levels --sizes {}'

S = {
 "timelimit_trap": ("srun", dict(NTASKS=4, TIME="00:01:00", EXTRA_SBATCH="#SBATCH --signal=B:USR1@30",
      ENV='trap \'echo "[$(date +%FT%T)] USR1: asking trainer to checkpoint"; touch $RUN/STOP\' USR1'),
      {"ppo": {"iterations": 1000000}, "logging": {"every": 100}, "eval": {"every": 500},
       "checkpoint": {"every": 100000}}),
 "world_size_env": ("srun", dict(NTASKS=2, ENV="export WORLD_SIZE=4"), {}),
 "eval_stall": ("torchrun", {}, {"ppo": {"iterations": 60}, "eval": {"every": 3, "episodes": 200000,
      "on_last_rank": True}}),
 "level_missing": ("torchrun", dict(PREP=LEVELS.format("6 6 6")),
      {"env": {"level_files": "levels/level_{rank}.json"}}),
 "level_shape": ("srun", dict(NTASKS=4, PREP=LEVELS.format("6 6 7 6")),
      {"env": {"level_files": "levels/level_{rank}.json"}}),
 "tb_import": ("torchrun", {}, {"logging": {"tensorboard": True}}),
 "envs_divide": ("srun", dict(NTASKS=3), {"ppo": {"total_envs": 8, "num_minibatches": 4}}),
 "resume_hidden": ("srun", dict(NTASKS=2), {"ppo": {"iterations": 8}}),
 "worker_slip_bug": ("torchrun", {}, {"env": {"slip_probs": [0.0, 0.2, 0.0, 0.0]}, "ppo": {"iterations": 30}}),
 "eval_record_oom": ("srun", dict(NTASKS=2, EXTRA_SBATCH="#SBATCH --mem=4G"),
      {"ppo": {"iterations": 12}, "eval": {"every": 2, "episodes": 5000000, "record": True}}),
}
DEFAULTS = dict(NTASKS=4, TIME="00:05:00", EXTRA_SBATCH="", ENV="", PREP="")
for name, (tmpl, subs, ov) in S.items():
    d = os.path.join(HERE, "scenarios", name); os.makedirs(d, exist_ok=True)
    txt = T[tmpl]
    for k, v in {**DEFAULTS, **subs}.items():
        txt = txt.replace("@%s@" % k, str(v))
    txt = "\n".join(l for l in txt.split("\n") if l.strip() != "" or True)
    open(os.path.join(d, "job.sbatch"), "w").write(txt)
    json.dump(ov, open(os.path.join(d, "overrides.json"), "w"), indent=1)
print("\n".join(S))
