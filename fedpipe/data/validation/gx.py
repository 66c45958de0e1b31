"""Great Expectations: one ephemeral context, each suite through its own checkpoint.

A checkpoint passes the same ``batch_parameters`` to every validation definition,
so one checkpoint cannot validate two different frames. ``great_expectations``
is imported when a validation runs (it takes several seconds).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from fedpipe.data.validation.spec import ROW_NUMBER, Check, Outcome, Spec

_DOCS_SITE = "fedpipe_validation"


def import_gx() -> Any:
    """Import great_expectations with analytics disabled (slow: several seconds;
    ``fedpipe run`` begins it in a process of its own as the run starts:
    :mod:`orchestration.prewarm`)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import great_expectations.expectations  # noqa: F401  (makes gx.expectations)

    return gx


class GxRunner:
    """One ephemeral GX context; runs each suite through its own checkpoint."""

    def __init__(self, spec: Spec, docs_dir: Path | None) -> None:
        self.gx = import_gx()
        self.gxe = self.gx.expectations
        self.spec = spec
        self.docs_dir = docs_dir
        self.context = self._make_context()
        self.datasource = self.context.data_sources.add_pandas("fedpipe")

    def _make_context(self) -> Any:
        """Ephemeral context: no temp docs site, no progress bars, no analytics."""
        from great_expectations.data_context.types.base import (
            DataContextConfig,
            InMemoryStoreBackendDefaults,
            ProgressBarsConfig,
        )

        config = DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(
                init_temp_docs_sites=False
            ),
            progress_bars=ProgressBarsConfig(globally=False),
            analytics_enabled=False,
        )
        context = self.gx.get_context(mode="ephemeral", project_config=config)
        if self.docs_dir is not None:
            context.add_data_docs_site(
                site_name=_DOCS_SITE,
                site_config={
                    "class_name": "SiteBuilder",
                    "show_how_to_buttons": False,
                    "store_backend": {
                        "class_name": "TupleFilesystemStoreBackend",
                        "base_directory": str(self.docs_dir),
                    },
                    "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                },
            )
        return context

    def _actions(self) -> list[Any]:
        """Checkpoint actions: update our Data Docs site if a report is wanted."""
        if self.docs_dir is None:
            return []
        from great_expectations.checkpoint import UpdateDataDocsAction

        return [UpdateDataDocsAction(name="update_data_docs", site_names=[_DOCS_SITE])]

    def _result_format(self, frame: pd.DataFrame) -> dict[str, Any]:
        """COMPLETE results, failing rows identified by sample id and position."""
        result_format: dict[str, Any] = {"result_format": "COMPLETE"}
        if ROW_NUMBER in frame.columns:  # the row summary, not the raw table
            result_format["unexpected_index_column_names"] = [
                self.spec.id_column,
                ROW_NUMBER,
            ]
        return result_format

    def run(self, name: str, frame: pd.DataFrame, checks: list[Check]) -> Outcome:
        """Validate ``frame`` against ``checks`` via a checkpoint named ``name``."""
        gx = self.gx
        batch = self.datasource.add_dataframe_asset(
            name
        ).add_batch_definition_whole_dataframe(name)
        suite = self.context.suites.add(
            gx.ExpectationSuite(
                name=f"fedpipe_{name}_checks",
                expectations=[check.expectation for check in checks],
            )
        )
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(data=batch, suite=suite, name=name)
        )
        checkpoint = self.context.checkpoints.add(
            gx.Checkpoint(
                name=f"fedpipe_{name}",
                validation_definitions=[definition],
                actions=self._actions(),
                result_format=self._result_format(frame),
            )
        )
        checkpoint_result = checkpoint.run(batch_parameters={"dataframe": frame})
        (suite_result,) = checkpoint_result.run_results.values()
        ordered = _align_results(suite, checks, suite_result.results)
        return Outcome(name, tuple(checks), ordered, checkpoint_result)


def _align_results(suite: Any, checks: list[Check], results: list[Any]) -> tuple:
    """Order GX results like ``checks`` (GX does not keep suite order)."""
    position = {exp.id: i for i, exp in enumerate(suite.expectations)}
    if len(position) != len(checks) or len(results) != len(checks):
        raise RuntimeError("GX returned an unexpected number of results")
    ordered: list[Any] = [None] * len(checks)
    for result in results:
        ordered[position[result.expectation_config.id]] = result
    return tuple(ordered)
