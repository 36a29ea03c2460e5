"""The operator's command line (``switchyard``): the same commands against the
running local platform or, with ``--aws``, a deployed stage. ``switchyard up``
starts the local platform (``switchyard_local``), which never imports this
package."""
