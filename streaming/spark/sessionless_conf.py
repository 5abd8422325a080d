"""The job's SQL conf for the driver JVM's threads that have no session.

Spark reads its SQL settings through ``SQLConf.get``: a thread's active session's, or where there
is none, a conf of Spark's defaults. transformWithState's state servers (one thread a stateful
task, started by the task's Python runner) have none, so they never see the session's settings;
above all not ``spark.sql.codegen.factoryMode=NO_CODEGEN`` (streaming.spark.session), and they
generate code for every state variable's encoders again in every task, most of their time
(bench/HISTORY.md, session 39). Here such threads get the session's conf; a thread with an active
session keeps its own (the query's cloned session turns adaptive execution off, for one).

Every SparkSession Spark constructs installs its own getter again, the query's cloned session
too, which ``writeStream.start()`` constructs before it returns: so this is called after each
query start. It reaches the driver's JVM only: local mode's state servers, not a cluster's
executors', which keep Spark's defaults (the job runs the same, as before).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

_SQL_CONF = "org.apache.spark.sql.internal.SQLConf"
_SESSION = "org.apache.spark.sql.classic.SparkSession"


def give_sessionless_threads_the_session_conf(spark) -> bool:
    """Install the getter (False, logged, if this Spark does not have the classes it is built of:
    the job then runs with Spark's getter, only slower)."""
    from py4j.protocol import Py4JError

    try:
        getter = _getter(spark)
        spark._jvm.org.apache.spark.sql.internal.SQLConf.setSQLConfGetter(getter)
    except Py4JError as exc:
        log.warning("the state servers keep Spark's default SQL conf (%s): the job runs, a little slower",
                    str(exc).splitlines()[0])
        return False
    return True


def _getter(spark):
    """A ``scala.Function0[SQLConf]``: SparkSession.getActiveSession's conf if the thread has a
    session, else this session's. Built of method handles, so no code of ours runs in the JVM."""
    jvm, gateway = spark._jvm, spark.sparkContext._gateway
    handles, types = jvm.java.lang.invoke.MethodHandles, jvm.java.lang.invoke.MethodType
    lookup = handles.publicLookup()
    cls = jvm.java.lang.Class.forName
    option, sql_conf, session = cls("scala.Option"), cls(_SQL_CONF), cls(_SESSION)
    state = cls("org.apache.spark.sql.internal.SessionState")

    active = lookup.findStatic(session, "getActiveSession", types.methodType(option))
    is_defined = lookup.findVirtual(option, "isDefined", types.methodType(jvm.java.lang.Boolean.TYPE))
    get = lookup.findVirtual(option, "get", types.methodType(cls("java.lang.Object")))
    get = get.asType(types.methodType(session, option))
    session_state = lookup.findVirtual(session, "sessionState", types.methodType(state))
    conf_of = lookup.findVirtual(state, "conf", types.methodType(sql_conf))
    active_conf = handles.filterReturnValue(handles.filterReturnValue(get, session_state), conf_of)

    ours = spark._jsparkSession.sessionState().conf()
    takes_option = gateway.new_array(jvm.java.lang.Class, 1)
    takes_option[0] = option
    our_conf = handles.dropArguments(handles.constant(sql_conf, ours), 0, takes_option)

    either = handles.guardWithTest(is_defined, active_conf, our_conf)
    return jvm.java.lang.invoke.MethodHandleProxies.asInterfaceInstance(
        cls("scala.Function0"), handles.filterReturnValue(active, either))
