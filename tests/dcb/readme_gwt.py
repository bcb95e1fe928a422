# ruff: noqa: F821
# The README's second DCB snippet: it runs after readme_example.py's definitions.
from reventless.testing import fold_model, given_dcb, tagged

given_dcb(courses, CourseDefined(course_id="c1", capacity=2)).when(
    Subscribe(student_id="ada", course_id="c1")
).then(StudentSubscribed(student_id="ada", course_id="c1"))

outcome = given_dcb(courses).when(Subscribe(student_id="ada", course_id="c9"))
outcome.then_rejected("course_full")

ada_in_c1 = StudentSubscribed(student_id="ada", course_id="c1")
assert fold_model(Subscriptions("student:ada"), ada_in_c1) == 1
given_dcb(courses, tagged(CourseDefined(course_id="c2", capacity=1), "term:2026"))  # extra tags
