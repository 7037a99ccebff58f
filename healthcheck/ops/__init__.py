"""Operations on runs: drain and schedulers, node-local mode, merge, nightly sweeps and history, assets.

Each builds on ``run`` and below; none is imported by a lower layer.
"""
