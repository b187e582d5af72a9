"""Building: the plan's DAG walked with the engine, each image measured and recorded.

  build        the ``Builder``: parents first, independent targets in parallel, cache, failure isolation
  buildreport  the build report (OUT/build-report.json) and a failed run's summary
  measured     what a built image and its base are held against: the plan, the platform (pure)
  cache        the build cache's keys: context hashes, the cache index, owner tags (pure)
  slots        how many builds run at once, and in which order
  cudabuild    the CUDA step: one shared layer per CUDA wheel set and OS base
  staging      images handed from machine to machine through a staging repository, by digest
"""
