"""Shared fixtures: the real-output corpus in ../shared/corpus (tests skip when it is absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
CORPUS = Path(os.environ.get("HEALTHCHECK_CORPUS", ROOT.parent / "shared" / "corpus"))


def corpus_text(relpath: str) -> str:
    """A corpus file without its first line (the ``# source:`` header); skips when absent."""
    path = CORPUS / relpath
    if not path.is_file():
        pytest.skip(f"corpus file {relpath} not available (../shared/corpus absent)")
    text = path.read_bytes().decode("utf-8", errors="replace")
    return text.split("\n", 1)[1] if "\n" in text else ""


def corpus_files(folder: str, pattern: str = "*.txt") -> list[Path]:
    """Corpus files of one tool folder (empty when the corpus is absent: parametrize then skips)."""
    base = CORPUS / folder
    return sorted(base.glob(pattern)) if base.is_dir() else []


@pytest.fixture
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus absent")
    return CORPUS


def fixture_text(relpath: str) -> str:
    """A project-owned fixture under tests/fixtures."""
    return (FIXTURES / relpath).read_text()


@pytest.fixture
def ssh_cluster_factory(tmp_path: Path):
    """Start real sshd test hosts: ``cluster = ssh_cluster_factory(3)``; all stopped at teardown."""
    from tests.sshhosts import SshCluster, sshd_available

    if not sshd_available():
        pytest.skip("OpenSSH sshd not installed (apt-get install openssh-server)")
    started: list[SshCluster] = []

    def make(count: int, names: list[str] | None = None, first_octet: int = 1, **kw) -> SshCluster:
        cluster = SshCluster.start(tmp_path / f"cluster{len(started)}", count, names=names,
                                   first_octet=first_octet, **kw)
        started.append(cluster)
        return cluster

    yield make
    for cluster in started:
        cluster.stop()
