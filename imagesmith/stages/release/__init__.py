"""Releasing: verified images tagged, pushed and read back by digest.

  releases   a release's values: the verified items it takes, tag fields, what a push sent, release.json
  tagplan    the pure plan: immutable tags, the release policy, image indexes, the fleet gate
  indexes    one OCI image index per tag of a multi-platform release
  push       the one push path (release and staging): retries, the registry's own words
  publish    the ``Publisher``: pushes what ``tagplan`` planned, floating tags, evidence
  promote    a staged image becomes a release without an engine
  recheck    ``vulns recheck``: every released digest judged again against newer advisories
"""
