"""The ``spanq`` command, one click group: serve.py has the server's commands (serve, token),
admin.py the client commands (queues, stats, peek, send, ...), which use only the SDK.

``main`` is the entry point (pyproject's [project.scripts]). Every error is one line on
stderr, ``spanq: <what went wrong>``, usage errors with where to read more and exit status 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click
from click.exceptions import NoArgsIsHelpError

from ..ground.config import Config
from . import serve


class Commands(click.Group):
    """Lists commands in the order they are added."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


class Spanq(Commands):
    """Imports the client commands (admin.py) only when one of them or the list is asked for, so
    that ``spanq serve`` loads neither the SDK nor rich, nor quiets gRPC's own logging."""

    def _client_commands(self) -> None:
        from . import admin  # noqa: F401, PLC0415  # its commands join this group

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            self._client_commands()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._client_commands()
        return super().list_commands(ctx)


@click.group(cls=Spanq, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="spanq", prog_name="spanq", message="%(prog)s %(version)s")
def group() -> None:
    """Spanner's queues on PostgreSQL, over gRPC: serve it, and work with its queues.

    Client commands talk to a server at --target (env SPANQ_TARGET, default localhost:50051).
    Exit status: 0 done, 1 failed, 2 bad usage or input, 3 no such queue, 4 already exists,
    5 not allowed, 6 server unreachable, 7 a precondition failed, 8 outcome unknown.
    """


group.add_command(serve.serve)
group.add_command(serve.token)

SHELLS = ("bash", "zsh", "fish")


@group.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL: commands, options and choices complete on Tab.

    \b
    bash:  eval "$(spanq completion bash)"   (in ~/.bashrc)
    zsh:   eval "$(spanq completion zsh)"    (in ~/.zshrc)
    fish:  spanq completion fish > ~/.config/fish/completions/spanq.fish
    """
    from click.shell_completion import get_completion_class  # noqa: PLC0415  # only for this command

    complete = get_completion_class(shell)
    assert complete is not None  # click.Choice took one of its shells
    click.echo(complete(group, {}, "spanq", "_SPANQ_COMPLETE").source())


def _invoke(argv: list[str], environ: Mapping[str, str]) -> Any:
    """Runs the command argv names, its options reading environ; returns what it returns (serve:
    its Config), or exits on an error, as main does."""
    try:
        return group.main(argv, prog_name="spanq", standalone_mode=False, obj=serve.Environment(environ))
    except NoArgsIsHelpError as exc:  # `spanq`, `spanq queue`: the help, as --help prints it
        click.echo(exc.format_message())
        sys.exit(0)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "spanq"
        click.echo(f"spanq: {exc.format_message()} (see `{where} --help`)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, click.Abort):
        click.echo("spanq: interrupted", err=True)
        sys.exit(130)


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """The Config ``spanq serve ...`` (argv: ["serve", ...]) starts with in that environment, and
    nothing started. Bad usage exits 2, with its error on stderr; --help exits 0."""
    result = _invoke(list(argv), environ)
    if not isinstance(result, Config):  # --help (or `spanq token`): printed, and done
        sys.exit(result if isinstance(result, int) else 0)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    """The ``spanq`` command: argv, else the process's arguments and environment."""
    result = _invoke(sys.argv[1:] if argv is None else list(argv), os.environ)
    if isinstance(result, Config):
        serve.run(result)
        return
    sys.exit(result if isinstance(result, int) else 0)
