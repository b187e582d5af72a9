"""Evidence: what travels with a digest, and whether it is believed.

  evidence     SBOM, verification attestation and signature attached to a pushed digest, and read back
  referrers    the documents and manifests evidence is made of, as bytes a registry stores (pure)
  attestation  in-toto Statements about an image, and the verification predicate
  sbom         the image's CycloneDX SBOM, from what was measured inside it
  vex          the image's vulnerability document (CycloneDX VEX)
  vulngate     known vulnerabilities as a gate: at validation, at release, after it
  trust        verification results as signed statements, and the release's trust policy
  reuse        whether signed evidence attached to a digest stands for a fresh run
"""
