"""The stages: each reads and writes one typed, versioned artifact (build, stage, verify, publish, promote, evidence, fleet, doctor)."""
