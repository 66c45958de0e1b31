"""The application: the ``fedpipe`` command, the stage client and its warm
worker, project scaffolding and templates, sweeps and variants. The only layer of
the library that may import the orchestration (``flows``, ``tasks``,
``orchestration``)."""
