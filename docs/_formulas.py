"""The update rules as LaTeX, shown at the top of each kernel family's and optimizer's API page.

Keyed by the defining module; a rule shared by the kernel, its sparse form, its reference and its optimizer
class is written once. The docstrings carry the exact arithmetic (order of operations, dtypes, MindSpore's
clamps); these are the same rules as mathematics, for reading. :math:`g` is the gradient, :math:`w` the
parameter, :math:`t` the step (from 1).
"""

_ADAM = r"""
m &\leftarrow m + (g - m)(1 - \beta_1), \qquad v \leftarrow v + (g^2 - v)(1 - \beta_2) \\
\mathrm{lr}_t &= \mathrm{lr}\,\frac{\sqrt{1 - \beta_2^t}}{1 - \beta_1^t}, \qquad
w \leftarrow w - \mathrm{lr}_t \, \frac{m}{\sqrt{v} + \epsilon}
\quad \text{(Nesterov: } \beta_1 m + (1 - \beta_1) g \text{ in place of } m\text{)}
"""
_ADAM_WEIGHT_DECAY = r"""
m &\leftarrow m + (g - m)(1 - \beta_1), \qquad v \leftarrow v + (g^2 - v)(1 - \beta_2) \\
w &\leftarrow w - \mathrm{lr}\left(\frac{m}{\sqrt{v} + \epsilon} + \lambda w\right)
\quad \text{(no bias correction)}
"""
_ADA_MAX = r"""
m &\leftarrow m + (g - m)(1 - \beta_1), \qquad v \leftarrow \max(\beta_2 v, |g|) \\
w &\leftarrow w - \frac{\mathrm{lr}}{1 - \beta_1^t} \, \frac{m}{v + \epsilon}
"""
_ADAGRAD = r"""
a &\leftarrow a + g^2 \\
w &\leftarrow w - \mathrm{lr}\,\frac{g}{\sqrt{a}}
\quad \text{(v2: } \sqrt{a} + \epsilon \text{ in the denominator)}
"""
_MOMENTUM = r"""
g &\leftarrow s\,g \quad (s = \texttt{gradient\_scale}), \qquad a \leftarrow \mu a + g \\
w &\leftarrow w - \mathrm{lr}\, a \quad \text{(Nesterov: } w \leftarrow w - \mathrm{lr}\,(g + \mu a)\text{)}
"""
_SGD = r"""
g &\leftarrow g + \lambda w \\
a &\leftarrow g \ \text{on the first step, else } a \leftarrow \mu a + (1 - \text{dampening})\, g \\
w &\leftarrow w - \mathrm{lr}\, a \quad \text{(Nesterov: } w \leftarrow w - \mathrm{lr}\,(g + \mu a)\text{)}
"""
_RMS_PROP = r"""
s &\leftarrow s + (g^2 - s)(1 - \rho), \qquad
\mathrm{mom} \leftarrow \mu\,\mathrm{mom} + \mathrm{lr}\,\frac{g}{\sqrt{s + \epsilon}}, \qquad
w \leftarrow w - \mathrm{mom} \\
&\text{centered: } \bar g \leftarrow \bar g + (g - \bar g)(1 - \rho), \ 
\sqrt{s - \bar g^2 + \epsilon} \text{ in the denominator}
"""
_FTRL = r"""
a' &= a + g^2, \quad p = -\texttt{lr\_power}, \quad \sigma = \frac{a'^{\,p} - a^{p}}{\mathrm{lr}} \\
z &\leftarrow z + g - \sigma w, \qquad a \leftarrow a' \\
w &\leftarrow \begin{cases}
\dfrac{\operatorname{sign}(z)\, l_1 - z}{a'^{\,p}/\mathrm{lr} + 2 l_2} & |z| > l_1 \\ 0 & \text{otherwise}
\end{cases}
"""
_PROXIMAL_ADAGRAD = r"""
a &\leftarrow a + g^2, \qquad \alpha = \frac{\mathrm{lr}}{\sqrt{a}}, \qquad u = w - \alpha g \\
w &\leftarrow \operatorname{sign}(u)\,\frac{\max(|u| - \alpha l_1, 0)}{1 + \alpha l_2}
"""
_LARS = r"""
c &= \eta\,\frac{\|w\|}{\|g\| + \lambda \|w\| + \epsilon} \\
g &\leftarrow c\,(g + \lambda w) \quad \text{(then the wrapped optimizer's step)}
"""
_LAMB = r"""
m &\leftarrow \beta_1 m + (1 - \beta_1) g, \quad v \leftarrow \beta_2 v + (1 - \beta_2) g^2, \quad
\hat m = \frac{m}{1 - \beta_1^t}, \quad \hat v = \frac{v}{1 - \beta_2^t} \\
u &= \frac{\hat m}{\sqrt{\hat v} + \epsilon} + \lambda w, \qquad
r = \operatorname{clip}\!\left(\frac{\|w\|}{\|\hat m / \sqrt{\hat v + \epsilon} + \lambda w\|}, 0, 10\right) \\
w &\leftarrow w - r\,\mathrm{lr}\,u
"""
_ADA_FACTOR = r"""
U_0 &= g^2 + \epsilon_1, \qquad \beta_{2,t} = 1 - t^{-c} \\
R &\leftarrow \beta_{2,t} R + (1 - \beta_{2,t})\,\operatorname{mean}_{-1}(U_0), \quad
C \leftarrow \beta_{2,t} C + (1 - \beta_{2,t})\,\operatorname{mean}_{-2}(U_0), \quad
U = \frac{g}{\sqrt{R\,C^\top / \operatorname{mean}(R)}} \quad (\text{rank} \ge 2) \\
V &\leftarrow \beta_{2,t} V + (1 - \beta_{2,t})\, U_0, \quad U = g / \sqrt{V} \quad (\text{rank} < 2) \\
U &\leftarrow U / \max(1, \operatorname{RMS}(U)/d), \qquad
\alpha = \rho \max(\epsilon_2, \operatorname{RMS}(w)) \ \text{(scale\_parameter) or } \rho \\
m &\leftarrow \beta_1 m + (1 - \beta_1)\,\alpha U \ \text{(first moment)}, \qquad
w \leftarrow w - \lambda \alpha w - m
"""
_SPARSE_ADAM = r"""
&\text{rows } r \text{ of the merged gradient } g_r \text{ (duplicates summed first):} \\
&\text{non-lazy: } m \leftarrow \beta_1 m,\ v \leftarrow \beta_2 v \text{ on every row; }
m_r \mathrel{+}= (1 - \beta_1) g_r,\ v_r \mathrel{+}= (1 - \beta_2) g_r^2;\
w \leftarrow w - \mathrm{lr}_t\, m / (\sqrt{v} + \epsilon) \text{ on every row} \\
&\text{lazy: only the indexed rows, with Adam's rule}
"""
_MERGE = r"""
\text{rows} = \operatorname{unique}(\text{indices}), \qquad
\text{summed}_j = \sum_{i:\ \text{indices}_i = \text{rows}_j} \text{values}_i
\quad \text{(in order of appearance)}
"""
_THOR = r"""
\tilde g &= G'^{-1}\, g\, A'^{-1} \quad \text{(damped Kronecker factors, refreshed every frequency steps)} \\
a &\leftarrow \mu a + \tilde g + \lambda w, \qquad w \leftarrow w - \mathrm{lr}\, a
"""

FORMULAS: dict[str, str] = {
    "optkernels.kernels.adam": _ADAM,
    "optkernels.reference.adam": _ADAM,
    "optkernels.optimizers.adam": _ADAM,
    "optkernels.optimizers.lazy_adam": _ADAM,
    "optkernels.optimizers.adam_offload": _ADAM,
    "optkernels.kernels.adam_weight_decay": _ADAM_WEIGHT_DECAY,
    "optkernels.optimizers.adam_weight_decay": _ADAM_WEIGHT_DECAY,
    "optkernels.kernels.ada_max": _ADA_MAX,
    "optkernels.reference.adamax": _ADA_MAX,
    "optkernels.optimizers.ada_max": _ADA_MAX,
    "optkernels.kernels.adagrad": _ADAGRAD,
    "optkernels.reference.adagrad": _ADAGRAD,
    "optkernels.sparse.adagrad": _ADAGRAD,
    "optkernels.optimizers.adagrad": _ADAGRAD,
    "optkernels.kernels.momentum": _MOMENTUM,
    "optkernels.reference.momentum": _MOMENTUM,
    "optkernels.optimizers.momentum": _MOMENTUM,
    "optkernels.kernels.sgd": _SGD,
    "optkernels.optimizers.sgd": _SGD,
    "optkernels.kernels.rms_prop": _RMS_PROP,
    "optkernels.reference.rmsprop": _RMS_PROP,
    "optkernels.optimizers.rmsprop": _RMS_PROP,
    "optkernels.kernels.ftrl": _FTRL,
    "optkernels.reference.ftrl": _FTRL,
    "optkernels.sparse.ftrl": _FTRL,
    "optkernels.optimizers.ftrl": _FTRL,
    "optkernels.kernels.proximal_adagrad": _PROXIMAL_ADAGRAD,
    "optkernels.reference.proximal_adagrad": _PROXIMAL_ADAGRAD,
    "optkernels.sparse.proximal_adagrad": _PROXIMAL_ADAGRAD,
    "optkernels.optimizers.proximal_adagrad": _PROXIMAL_ADAGRAD,
    "optkernels.kernels.lars": _LARS,
    "optkernels.reference.lars": _LARS,
    "optkernels.optimizers.lars": _LARS,
    "optkernels.kernels.lamb": _LAMB,
    "optkernels.reference.lamb": _LAMB,
    "optkernels.optimizers.lamb": _LAMB,
    "optkernels.kernels.ada_factor": _ADA_FACTOR,
    "optkernels.reference.ada_factor": _ADA_FACTOR,
    "optkernels.optimizers.ada_factor": _ADA_FACTOR,
    "optkernels.sparse.adam": _SPARSE_ADAM,
    "optkernels.sparse.merge": _MERGE,
    "optkernels.optimizers.thor": _THOR,
}
