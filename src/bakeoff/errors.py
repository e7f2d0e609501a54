"""One root exception; the CLI knows how to print each subclass."""


class BakeoffError(Exception):
    """Root of every error bakeoff raises on purpose."""

    exit_code = 1


class SpecError(BakeoffError):
    """The sweep spec (or a CLI flag) is invalid. The message names the field."""

    exit_code = 2


class MissingExtra(BakeoffError):
    """An optional part of bakeoff needs a package that is not installed (matplotlib for
    ``report --html``, optuna for ``plan.strategy = "optuna"``); the message is the install command."""

    exit_code = 2

    def __init__(self, what: str, extra: str, package: str) -> None:
        super().__init__(f"{what} needs {package}, which is not installed: pip install 'bakeoff[{extra}]'")


class StoreError(BakeoffError):
    """The sweep directory cannot be used (schema too new, locked by another run)."""

    exit_code = 2


class LaunchError(BakeoffError):
    """The host could not start the engine at all (binary missing, ssh refused)."""


class InfraError(BakeoffError):
    """Something outside the configuration failed (node died, ssh dropped)."""

    exit_code = 3


class LmEvalError(InfraError):
    """lm-evaluation-harness could not judge a trial (not installed, crashed, wrote no samples):
    not a verdict on the configuration. ``evidence`` holds the lines that show why (the tail of
    its output)."""

    cause = "lm_eval"

    def __init__(self, message: str, evidence: list[str] | None = None) -> None:
        super().__init__(message)
        self.evidence = evidence or []
