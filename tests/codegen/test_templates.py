"""The templates refuse what they have no text for: an op context whose macro does not exist
stops the render with its name, instead of leaving a silent gap in the kernel."""
import jinja2
import pytest

from kgen.codegen.render import environment


def test_an_op_without_a_macro_stops_the_render():
    ops = environment().get_template("common/ops.j2").module
    with pytest.raises(jinja2.TemplateRuntimeError, match="no template macro for the op context 'bogus'"):
        ops.dispatch({"macro": "bogus", "loc": ""})
