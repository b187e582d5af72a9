"""Tools around the pipeline: the host's readiness and base images where no registry is reachable.

  doctor          ``imagesmith doctor``: can this host build and verify the matrix
  doctor_release  what ``doctor --release`` asks the release registry itself
  bootstrap       base images made with debootstrap and imported, where no registry is reachable
"""
