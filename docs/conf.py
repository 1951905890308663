"""Sphinx configuration of the pyg_ioaware documentation.

Build (from the repository root, with ``pip install ".[docs]"`` done):

    python -m sphinx -W --keep-going -n -b html docs docs/_build/html

``-W --keep-going`` turns every warning into an error (all of them are
reported before the build fails), ``-n`` (nitpicky) makes a reference to a
missing page, label or pyg_ioaware object a warning. The notebooks in
docs/notebooks are executed on every build (a failing cell fails it), and
the benchmark tables, plots and design figures are regenerated from the
JSON files in docs/ by docs/scripts/ before Sphinx reads a page.
"""
from __future__ import annotations

import os
import pathlib
import runpy

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent


# Generated content (docs/_generated, git-ignored): rebuilt on every build.
for _script in ("make_benchmarks.py", "make_figures.py"):
    runpy.run_path(str(DOCS / "scripts" / _script), run_name="docs_build")["generate"](
        DOCS / "_generated")

# The "Scaling out" section of the index lists the pages on multi-GPU and
# full-graph training that exist (docs/distributed*.md, docs/full_graph*.md).
_scaling = sorted(p.stem for pattern in ("distributed*.md", "full_graph*.md")
                  for p in DOCS.glob(pattern))
(DOCS / "_generated" / "scaling_out_toctree.md").write_text(
    "```{toctree}\n:caption: Scaling out\n:maxdepth: 1\n\n"
    + "".join(f"/{name}\n" for name in _scaling) + "```\n" if _scaling else "\n")

import pyg_ioaware  # noqa: E402  (after the generators: they need no torch)
import pyg_ioaware.ops  # noqa: E402

# torch.library custom ops (CustomOpDef) are documented as the Python
# function they wrap: autodoc follows __wrapped__ to its signature.
for _name in pyg_ioaware.ops.__all__:
    _obj = getattr(pyg_ioaware.ops, _name)
    if hasattr(_obj, "_init_fn"):
        _obj.__wrapped__ = _obj._init_fn

project = "pyg_ioaware"
author = "the pyg_ioaware authors"
copyright = "2026, the pyg_ioaware authors"
release = pyg_ioaware.__version__
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]

exclude_patterns = ["_build", "_generated", "jupyter_execute", "**.ipynb_checkpoints", "scripts",
                    "_templates"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
templates_path = ["_templates"]

# ------------------------------------------------------------------ MyST / notebooks
myst_enable_extensions = ["colon_fence", "dollarmath", "amsmath", "deflist"]
myst_heading_anchors = 3
# Every build runs every notebook ("off" through this variable for a quick
# look at the prose while editing; CI never sets it).
nb_execution_mode = os.environ.get("PYG_IOAWARE_DOCS_EXECUTE", "force")
nb_execution_raise_on_error = True   # a failing cell fails the build
nb_execution_timeout = 600           # seconds per cell
nb_execution_show_tb = True          # the traceback in the log when a cell fails
nb_merge_streams = True

# ------------------------------------------------------------------ API pages
autosummary_generate = True
autosummary_imported_members = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_inherit_docstrings = False
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = ["Shapes", "Dtypes"]

# Nitpicky: every reference inside pyg_ioaware must resolve. There is no
# network at build time (no intersphinx), so references to other projects
# (torch, torch_geometric, Python builtins and typing) are accepted unresolved.
nitpicky = True
# The generated benchmark tables (docs/_generated) are included under an H1.
suppress_warnings = ["myst.header"]
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|torch_geometric|torch_sparse|typing|collections|numpy|ctypes)(\..*)?"),
    (r"py:.*", r"(Tensor|OptTensor|Adj|OptPairTensor|PairTensor|Size|NoneType|Module|Parameter"
               r"|MessagePassing|Aggregation|Linear|Data|EdgeIndex|SparseTensor|NumNodes"
               r"|Iterator|Callable|Sequence|Optional|Union|Any|Tuple|List|Dict|Generator"
               r"|optional|callable|sequence|iterable|str|int|float|bool|tuple|list|dict"
               r"|None|True|False|object|type|bytes|Path|dtype|device)"),
    (r"py:.*", r"(int|str|float|bool|tuple|list|dict) or .*|.* or (int|str|float|bool|tuple|None)"),
    # PyG-style :obj: markup of literal values (:obj:`"add"`, :obj:`0.99`).
    (r"py:obj", r"(?![A-Za-z_][\w.]*$).*"),
    # torch_geometric's classes named without their module in PyG-derived docstrings.
    (r"py:.*", r"(MessagePassing|MultiAggregation|Aggregation)(\..*)?"),
]


def _public_bases(app, name, obj, options, bases):
    """Show a private base class (``_NeighborAggregation``) as its own bases."""
    public = []
    for base in bases:
        queue = [base]
        while queue:
            cls = queue.pop(0)
            if cls.__name__.startswith("_"):
                queue[:0] = list(cls.__bases__)
            elif cls not in public:
                public.append(cls)
    bases[:] = public


def setup(app):
    app.connect("autodoc-process-bases", _public_bases)


# ------------------------------------------------------------------ HTML
html_theme = "pydata_sphinx_theme"
html_title = "pyg_ioaware"
html_static_path = []
html_theme_options = {
    "navigation_depth": 2,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
