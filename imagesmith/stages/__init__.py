"""The stages, in pipeline order: each reads and writes one typed, versioned artifact.

  build/     the plan built with the engine, staged by digest
  verify/    the payload run in each image, judged on the host
  release/   verified images tagged, pushed, promoted; released digests rechecked
  evidence/  SBOM, attestations, signatures and the trust policy that believes them
  fleet/     verification fanned out to a GPU fleet
  tools/     doctor and the base-image bootstrap
  artifacts  the records stages hand each other on disk; metrics: verification metrics leave the host
"""
