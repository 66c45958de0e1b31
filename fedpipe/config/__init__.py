"""Settings: the ``params.yaml`` schema (:mod:`fedpipe.config.params`), the
project's file layout, overrides written into ``params.yaml``, and privacy settings."""
