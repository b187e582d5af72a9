"""Verification: the payload from verify/ run inside an image (or on this host), its answer judged on the host.

  verify       what a run asks: the options, the request (checks, nonce), the payload's config; the outcome
  incontainer  the payload in a container (``verify_image``), beside or through the image's ENTRYPOINT
  onhost       the payload on this host's Python (``run_local``: ``verify --local``)
  judge        the payload's one report line read strictly and judged against the request; the host's notes
  sampling     the host's NVML watch over the GPUs during the run, joined with the payload's report
  served       the digests a report names: the ones the registry serves, an image index's platform entry
  payload      what the host puts into a container beside the image, and the host's own check entries
  entrypoint   the image's ENTRYPOINT as users meet it, and how the payload runs beside it
  gpus         which way GPUs reach the container (``--gpus`` or CDI), and the spec that takes it
  gpuwatch     the verdict on the run's GPUs: what the host watched, joined with what the payload reported
  probe        security.service: the image's own command, started and probed
"""
