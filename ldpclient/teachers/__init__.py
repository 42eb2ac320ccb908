"""Teacher adapters: the remote (or in-process) classifier that labels LDP queries."""

from .base import Queries, Teacher, TeacherMetadata

__all__ = ["Queries", "Teacher", "TeacherMetadata"]
