"""Building: the plan's DAG walked with the engine, each image measured and recorded.

  build        the ``Builder``: parents first, independent targets in parallel, cache, failure isolation
  buildreport  the build report (OUT/build-report.json) and a failed run's summary
  measured     what a built image and its base are held against: the plan, the platform (pure)
"""
