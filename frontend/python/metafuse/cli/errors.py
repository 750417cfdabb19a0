"""The error every subcommand raises for a failure the user can fix."""


class CliError(Exception):
    """Printed as ``metafuse: error: <message>`` (one line), then
    ``details`` (e.g. a script's traceback summary); exit status 1."""

    def __init__(self, message, details=()):
        super().__init__(message)
        self.details = list(details)
