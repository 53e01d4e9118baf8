"""fedustat: private and secure U-statistics over data held by many parties."""

__version__ = "0.1.0"
