"""Ray clusters from the outside: joining one (``connection``) and submitting runs to
one as Ray Jobs (``jobs``, behind ``grouprl submit`` and ``grouprl jobs``)."""
