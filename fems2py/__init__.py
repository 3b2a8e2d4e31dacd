"""fems2py: compile FEM multi-agent scripts (``.fems``) to plain, readable Python."""

__version__ = "0.1.0"
