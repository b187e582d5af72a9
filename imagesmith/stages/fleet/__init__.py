"""Verification fanned out to a GPU fleet.

``fleet.yaml`` names GPU classes and where each runs (a Slurm partition or a
Kubernetes namespace); ``imagesmith fleet verify`` submits one job per
(digest x class), follows them, and writes one fleet report; ``publish``
moves a floating tag only when every class the fleet file requires passed.

  (fleet.yaml's schema, loading and validation: imagesmith.model.fleet, pure; the fleet report
   (imagesmith.fleet-report/1: cells, figures against baselines): imagesmith.model.fleetreport)
  slurm       batch scripts and sbatch/squeue/scancel (argv only, never a shell string)
  kubernetes  batch/v1 Jobs built with the official client's models; submit/watch/delete behind a seam
  runner      the loop: submit, follow, deadlines, Ctrl-C, collect each verify report
  gate        the publish gate: which required class held a digest back
"""
