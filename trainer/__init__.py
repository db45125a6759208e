"""Streaming training: models, the worker step, passes, checkpoints, bundles, recovery.

The models themselves live in ``models/``, the bundle format and the predictor in ``exports/``.

Training
  job_config.py    PassConfig / JobConfig (one YAML; unknown keys are errors)
  ps_worker.py     PSWorker: the trainer's view of the PS, a client plus an update mode
  params.py        LocalStore / PSStore: pull/push sparse, dense vector, step end, drain
  dense_sync.py    dense_update local (workers' optimizers, changes merged through the PS every
                   k steps) or ps (gradients pushed, the shards' optimizer, pulled every k steps)
  worker.py        one step per call: prepare -> pull -> forward (scored first) -> backward -> push
  prefetch.py      next batches' parsing, features and (async) pull in a thread or a child process
  auc.py, metrics.py  bucketed AUC (exact merge), windowed progressive metrics
Passes and serving hand-off
  passes.py        when a pass ends (N records or T seconds); PassProgress: where a worker stands
  checkpoints.py   checkpoints/pass-<n>/ layout, manifest last, verify, prune
  pass_commit.py   PassCommitter: each worker's part, two barriers, the chief's two-phase commit
  recovery.py      newest complete pass -> shards load, offsets, optimizer state; Recovery: regroup,
                   recover shards, rollback
  rendezvous.py    the pass barriers; leased ranks: rendezvous named after the membership epoch
  export.py        bundles (exports.bundle) in a background thread; their item vectors cover the
                   job's one item catalogue in the PS (exports.item_catalog, two-tower)
  history_join.py  users' history (schema.history): each batch joined point in time with the
                   users' rings in the PS, its positives appended
  job.py           the streaming job: the step loop and its lifecycle (job_context.py: what it shares)
  job_stream.py    a worker's partitions as mini-batches (minibatch.py), offsets marked pushed, lag
  job_control.py   its control handler (jobcontrol.channel); loop_calls.py runs ops between steps
  rank_claim.py    STREAMREC_RANK=auto: the rank claimed on shard 0, renewed in a thread, released
  infer.py         infer mode; file_job.py / file_worker.py: `streamrec train-files`
"""
